"""``streamrec serve``: the FastAPI service (embeddings, items, recommend, predict, admin) under uvicorn."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    p = subparsers.add_parser("serve", help="serve the latest exported bundle over HTTP",
                              description="Run the streamrec service. The admin token is read from the variable "
                                          "named by admin_token_env (default STREAMREC_ADMIN_TOKEN); the service "
                                          "refuses a non-loopback host without a non-default token.")
    p.add_argument("--config", required=True, help="service YAML (service.settings.ServiceSettings)")
    p.add_argument("--host", help="bind address (overrides the config)")
    p.add_argument("--port", type=int, help="port (overrides the config)")
    p.add_argument("--log-level", choices=("critical", "error", "warning", "info", "debug"),
                   help="uvicorn's own lines (default: the config's logging.level)")
    p.set_defaults(func=run)


def _allow_open_files(connections: int) -> None:
    """Raise the soft open-files limit towards the hard one, so ``max_connections`` sockets (and
    the bundles' files beside them) fit: a common soft limit of 1024 would refuse connections first."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = connections + 1024
    if soft != resource.RLIM_INFINITY and soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want if hard == resource.RLIM_INFINITY else min(want, hard), hard))


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from service.app import create_app
    from service.connections import uvicorn_options
    from service.settings import load_settings
    from stores.staging import Mirror

    settings = load_settings(args.config, host=args.host, port=args.port)
    _allow_open_files(settings.limits.max_connections)
    # exports_dir may be an fsspec URL (s3://...): bundles are pulled into a local staging dir
    with Mirror(settings.exports_dir, every_s=settings.poll_seconds) as local:
        settings = settings.model_copy(update={"exports_dir": str(local)})
        app = create_app(settings, log_config=settings.logging)
        # header, idle and connection-count limits (service.connections); the body's deadline is the app's.
        # uvicorn's lines go through the role's log (core.logs, configured by cli/main.py); its access
        # log has no duration or request id, so the app writes its own (service.access_log).
        uvicorn.run(app, host=settings.host, port=settings.port, workers=1, log_config=None, access_log=False,
                    log_level=args.log_level or settings.logging.level.value,
                    **uvicorn_options(settings.limits, app.state.connection_stats))
    return 0
