"""The online side: serves the newest exported bundle over HTTP (``streamrec serve``).

``service.app.create_app(settings)`` builds the FastAPI app; its lifespan owns the
``ModelStore`` (two copies of the served tables, swapped atomically per bundle, with the
Faiss item index snapshot and the scoring model of each version), the ``ExportWatcher`` that
applies new bundles from ``exports_dir`` in order, and the ``JobLink`` to the training job's
control channel for the admin API. One router per resource lives in ``service.routes``.
"""
