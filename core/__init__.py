"""What every layer may import: the one error hierarchy and typed config loading.

  errors.py        StreamrecError and its subclasses (code + HTTP status each)
  yaml_config.py   FrozenModel (immutable, unknown keys are errors), load_yaml, validate_config
  atomic_files.py  temp + fsync + rename writes, CRC-32C manifests, verified reads
"""
