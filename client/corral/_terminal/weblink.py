"""The web board of a running daemon: its address (from the state directory) and a
one-time login link, minted by the board for the Lead's credential.

The link carries a ticket, not a credential, in its fragment (`/login#ticket=...`):
a fragment never reaches a server or its logs, and the ticket opens one session
within two minutes, then is spent.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from pathlib import Path

WEB_ADDRESS_NAME = "web.address"


def board_url(state_dir: Path) -> str | None:
    """The URL the daemon on `state_dir` serves its board at, or None when it serves none."""
    try:
        return (state_dir / WEB_ADDRESS_NAME).read_text().strip() or None
    except FileNotFoundError:
        return None


def one_time_link(url: str, lead_token: str, *, cafile: str | None = None, timeout: float = 5.0) -> str:
    """A login link for the board at `url`; raises OSError when the board cannot mint one."""
    request = urllib.request.Request(
        f"{url}/login/ticket", method="POST", headers={"Authorization": f"Bearer {lead_token}"}, data=b""
    )
    context = ssl.create_default_context(cafile=cafile) if url.startswith("https:") else None
    try:
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:  # noqa: S310 (our board)
            ticket = json.loads(response.read())["ticket"]
    except urllib.error.HTTPError as error:
        raise OSError(f"the board refused a login ticket (HTTP {error.code})") from None
    except (KeyError, ValueError):
        raise OSError("the board's answer held no login ticket") from None
    return f"{url}/login#ticket={ticket}"
