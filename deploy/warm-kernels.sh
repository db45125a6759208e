#!/bin/sh
# Compiles streamrec's numba kernels into $NUMBA_CACHE_DIR at image build time, so no pod compiles
# them at its start: one small train-files run (a shard and a worker, then the test pass) per model
# type, on generated events. Run in an empty directory, so every role imports the installed
# packages, whose paths key the cache, not a source tree. A kernel this misses is compiled on first
# use and saved into the same (writable) cache.
set -eu
: "${NUMBA_CACHE_DIR:?set NUMBA_CACHE_DIR to the cache directory the image ships}"
work=$(mktemp -d)
cd "$work"
streamrec generate --out train.tsv --rows 2000 --seed 1 >/dev/null
streamrec generate --out test.tsv --rows 500 --seed 2 >/dev/null
for model in lr wide_deep deepfm two_tower; do
    streamrec train-files --train train.tsv --test test.tsv --model "$model" --servers 1 --workers 1 \
        --work-dir "$work/$model" --json >/dev/null
done
cd /
rm -rf "$work"
echo "numba kernels cached in $NUMBA_CACHE_DIR: $(find "$NUMBA_CACHE_DIR" -name '*.nbi' | wc -l) kernels"
