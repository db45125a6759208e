"""Bearer-token guard of the admin API: missing credentials 401, wrong ones 403."""

from __future__ import annotations

import hmac
from typing import Annotated

from fastapi import Depends, Request
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from core.errors import Forbidden, Unauthorized

_bearer = HTTPBearer(auto_error=False, description="the admin token (from the variable named by admin_token_env)")


async def require_admin(
    request: Request, creds: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)]
) -> None:
    token: str = request.app.state.settings.admin_token
    if creds is None or not creds.credentials:
        raise Unauthorized("admin API needs 'Authorization: Bearer <token>'")
    if not token:
        raise Forbidden("admin API disabled: no admin token configured for this service")
    if not hmac.compare_digest(creds.credentials.encode(), token.encode()):
        raise Forbidden("admin token is wrong")
