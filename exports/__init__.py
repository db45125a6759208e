"""The inference bundle: what training exports and the service serves.

  bundle.py        bundle directories, the manifest written last, publish/read/list
  predictor.py     Predictor(model_config, dense, lookup) and instances_to_batch
  raw_records.py   RecordHasher: a record's own field values -> feature ids, by the job's schema
"""
