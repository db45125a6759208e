"""The inference bundle: what training exports and the service serves.

  bundle.py        bundle directories, the manifest written last, publish/read/list
  predictor.py     Predictor(model_config, dense, lookup) and instances_to_batch
  raw_records.py   RecordHasher: a record's own field values -> feature ids, by the job's schema
  item_catalog.py  the job's one item catalogue in the PS (ids.items): written by trainers, read
                   by the exporter (from the bundle's shard saves) and the service's live path
  history_table.py the users' history table: name, row layout, the history slot's ids
"""
