"""What a model sees: text from other parties labelled with its source, every
result bounded, bytes that are not UTF-8 in base64.

Task descriptions, payloads, results, messages and plans were written by
someone other than the agent reading them, so each one travels as an object
naming its author and role (`{"from": "lead", "role": "lead", "text": ...}`)
rather than as bare text a model might take for its instructions.
"""

from __future__ import annotations

import base64
import json
from typing import Any

__all__ = ["RESULT_TEXT_MAX_BYTES", "TextBudget", "render_text"]

# The most model-visible text one result carries; get_task pages past it with `offset`.
RESULT_TEXT_MAX_BYTES = 32 * 1024
# The share of a result that text from other parties may take, leaving room for the rest.
_FOREIGN_TEXT_BYTES = 24 * 1024


class TextBudget:
    """The bytes of foreign text one result may still carry; `truncated` once any was cut."""

    def __init__(self, total: int = _FOREIGN_TEXT_BYTES) -> None:
        self.left = total
        self.truncated = False

    def labelled(self, data: bytes | str, *, source: str, role: str, offset: int = 0) -> dict[str, Any]:
        """`data` from `source` (a name) in `role`, from byte `offset`, cut to what the budget leaves.

        UTF-8 text is returned as `text`; anything else as base64 in `data`
        with `encoding: "base64"`. `size` is the whole length in bytes, so a
        reader knows how much a truncated one left out.
        """
        raw = data.encode("utf-8") if isinstance(data, str) else data
        piece = raw[offset:]
        out: dict[str, Any] = {"from": source, "role": role, "size": len(raw)}
        if offset:
            out["offset"] = offset
        try:
            text = piece.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        if text is None:
            # Base64 grows by a third: cut the raw bytes so the encoded form fits.
            room = max(self.left * 3 // 4, 0)
            kept = piece[:room]
            out.update(encoding="base64", data=base64.b64encode(kept).decode("ascii"))
            self.left -= (len(kept) + 2) // 3 * 4
        else:
            kept_text = _cut_utf8(text, self.left)
            kept = kept_text.encode("utf-8")
            out.update(encoding="utf-8", text=kept_text)
            self.left -= len(kept)
        if len(kept) < len(piece):
            self.truncated = True
            out["truncated"] = True
            out["next_offset"] = offset + len(kept)
        return out


def _cut_utf8(text: str, limit: int) -> str:
    """The longest prefix of `text` whose UTF-8 form has at most `limit` bytes."""
    encoded = text.encode("utf-8")
    if len(encoded) <= limit:
        return text
    return encoded[: max(limit, 0)].decode("utf-8", errors="ignore")


def render_text(summary: str, structured: dict[str, Any]) -> str:
    """The compact text rendering for clients that ignore structured content: a one-line
    summary, then the structured content as compact JSON, within RESULT_TEXT_MAX_BYTES."""
    body = json.dumps(structured, ensure_ascii=False, separators=(",", ":"), default=str)
    text = f"{summary}\n{body}"
    if len(text.encode("utf-8")) > RESULT_TEXT_MAX_BYTES:
        text = _cut_utf8(text, RESULT_TEXT_MAX_BYTES - 40) + "\n[truncated: see structured content]"
    return text
