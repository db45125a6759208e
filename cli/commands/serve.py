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
    p.add_argument("--log-level", default="info", choices=("critical", "error", "warning", "info", "debug"))
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from service.app import create_app
    from service.settings import load_settings
    from stores.staging import Mirror

    settings = load_settings(args.config, host=args.host, port=args.port)
    # exports_dir may be an fsspec URL (s3://...): bundles are pulled into a local staging dir
    with Mirror(settings.exports_dir, every_s=settings.poll_seconds) as local:
        settings = settings.model_copy(update={"exports_dir": str(local)})
        uvicorn.run(create_app(settings), host=settings.host, port=settings.port, log_level=args.log_level,
                    workers=1, access_log=False, limit_concurrency=settings.limits.max_connections,
                    timeout_keep_alive=5)
    return 0
