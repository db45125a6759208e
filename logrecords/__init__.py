"""The record model: what one event is, before and apart from where it came from.

- :class:`logrecords.schema_config.SchemaConfig`: a record's slots, hashing, label, event time and history.
- :class:`logrecords.batch.Batch`: labels, dense matrix, per-slot ragged uint64 ids, optional event
  time / user id / item id, and the source ``(partition -> first, last offset)`` span.
- :mod:`logrecords.hashing`: a value's feature id (``slot_id << 56 | hash``), the same at training and serving.
- :func:`logrecords.parsers.make_parser` (JSON lines, CSV, Criteo TSV) and :mod:`logrecords.file_formats`
  (the same over files, Parquet included): a batch plus the rejected records with their reasons.
- :mod:`logrecords.schema_inference`: a schema proposed from a sample of a user's own log.
- :class:`logrecords.generator.PlantedModel` and :mod:`logrecords.sample_encoding`: synthetic data with
  a known Bayes-optimal AUC.

Nothing here talks to Kafka (that is :mod:`streaming`), so the model, the exported bundle and the
service read records without the broker's client.
"""
