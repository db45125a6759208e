"""Self-tests of the benchmarks' helpers (metrics, baselines, data, probes): `make bench-test`, which installs the
bench extras; `make test` neither runs nor needs them."""
