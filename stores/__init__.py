"""Checkpoint and export roots by URL (a local path, file://, s3://) and local staging of them.

  store.py         Store (the abstract root), open_store(url), what atomic means on each backend
  staging.py       local copies of directories under a root: staged saves, fetched restores
"""
