"""The console's notices: fixed texts chosen by a code in the URL, never text from the URL.

A form handler redirects to a page with ``?msg=<code>`` or ``?err=<code>`` (Post/Redirect/Get).
The page shows the text this module holds for that code, and nothing for a code it does not
know: a link crafted with ``?err=Your+session+expired,+log+in+at+evil.example`` puts no
attacker-chosen words into the page's alert box. The only value taken from the URL is a
count (``n``, digits only) for the recovery notice.
"""

from __future__ import annotations

from collections.abc import Mapping

from relay.exceptions import (
    DeliveryNotFound,
    NotRetryable,
    OutboundBusy,
    StateError,
    WebhookDisabled,
    WebhookNotFound,
    WebhookNotVerified,
)

MESSAGES: dict[str, str] = {
    "retried": "Retry queued: the delivery is due now (same webhook-id).",
    "recovered": "Recovered {n} deliveries: due again now.",
    "disabled": "Webhook disabled: its pending delivery is canceled.",
    "enabled": "Webhook enabled.",
}

ERRORS: dict[str, str] = {
    "no_delivery": "No such delivery.",
    "no_webhook_for_batch": "That batch has no webhook.",
    **{f"not_retryable_{why}": t[:1].upper() + t[1:] for why, t in NotRetryable.MESSAGES.items()},
    "not_retryable": "This delivery cannot be sent again.",
    "refused": "Refused: the state changed meanwhile (reload the page).",
    "webhook_not_verified": "Not sent: the webhook's endpoint verification is pending or failed.",
    "webhook_disabled": "Not sent: the webhook is disabled (enable it first).",
    "outbound_busy": "Not sent: too many test sends are in flight; try again in a few seconds.",
    "bad_recovery": "Status is failed or canceled; since is required (6h, 2d or 2026-11-30T12:00).",
}


def error_code(exc: StateError | OutboundBusy) -> str:
    """The ``err`` code of a refusal of the state layer (or of a test send's lane)."""
    if isinstance(exc, OutboundBusy):
        return "outbound_busy"
    if isinstance(exc, WebhookNotVerified):
        return "webhook_not_verified"
    if isinstance(exc, WebhookDisabled):
        return "webhook_disabled"
    if isinstance(exc, DeliveryNotFound):
        return "no_delivery"
    if isinstance(exc, WebhookNotFound):
        return "no_webhook_for_batch"
    if isinstance(exc, NotRetryable):
        code = f"not_retryable_{exc.reason}"
        return code if code in ERRORS else "not_retryable"
    return "refused"


def notices(query: Mapping[str, str]) -> tuple[str, str]:
    """``(message, error)`` for a page's query: the fixed texts of its codes, "" for none."""
    count = query.get("n", "")
    message = MESSAGES.get(query.get("msg", ""), "")
    if "{n}" in message:
        plain_count = count.isascii() and count.isdigit() and len(count) <= 12
        message = message.format(n=count) if plain_count else ""
    return message, ERRORS.get(query.get("err", ""), "")
