"""Continuous ingestion: Kafka (or files) -> parsed columnar micro-batches for the trainer.

The trainer's surface:

- :class:`streaming.batch.Batch`: labels, dense matrix, per-slot ragged uint64 ids, optional
  event time / user id / item id, and the source ``(partition -> first, last offset)`` span.
- :class:`streaming.consumer.StreamConsumer`: ``poll_batch()`` / ``batches()``, ``seek_to(offsets)``,
  ``committable()``, ``lag()``; its ``tracker`` (:class:`streaming.offsets.OffsetTracker`) takes
  ``mark_pushed(batch)`` after gradients were pushed (the offset rule is in :mod:`streaming.offsets`).
- :class:`streaming.broker.EmbeddedBroker` and :func:`streaming.broker.bootstrap_servers`: the
  tansu broker used when no cluster is configured.
- :class:`streaming.file_dataset.FileDataset`: the same parsers over files, streamed or in memory.
- :class:`streaming.generator.PlantedModel` and :mod:`streaming.sample_encoding`: synthetic data with
  a known Bayes-optimal AUC.
"""
