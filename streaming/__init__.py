"""Continuous ingestion: Kafka (or files) -> parsed columnar micro-batches for the trainer.

The trainer's surface:

- :class:`streaming.consumer.StreamConsumer`: ``poll_batch()`` / ``batches()``, ``seek_to(offsets)``,
  ``committable()``, ``lag()``; its ``tracker`` (:class:`streaming.offsets.OffsetTracker`) takes
  ``mark_pushed(batch)`` after gradients were pushed (the offset rule is in :mod:`streaming.offsets`).
- :class:`streaming.broker.EmbeddedBroker` and :func:`streaming.broker.bootstrap_servers`: the
  tansu broker used when no cluster is configured.
- :class:`streaming.producer.RecordProducer`, :class:`streaming.dead_letter.DeadLetters`: writing
  records and the rejected ones.
- :class:`streaming.file_dataset.FileDataset`: the same parsers over files, streamed or in memory.

What a record is (schema, batch, hashing, parsers) lives in :mod:`logrecords`.
"""
