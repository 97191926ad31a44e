"""The API's response bodies around the records: the ``TypedDict``s the handlers build them
as, so mypy holds each handler to the shape the OpenAPI document publishes (its schemas are
made from these, ``relay.api.openapi_schemas``), like the records' (``relay.state.model``) and the
events' (``relay.state.event_bodies``)."""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from relay.shapes import Schema, components
from relay.state.event_bodies import COMPONENTS as EVENTS
from relay.state.event_bodies import FeedEvent
from relay.state.model import DELIVERY_ID_PATTERN, BatchJSON, Delivery, DeliveryJSON, DocumentJSON

NextCursor = Annotated[
    str | None, Schema(description="Pass as `cursor` for the next page; null on the last page.")
]


class ErrorDetailJSON(TypedDict):
    type: Annotated[str, Schema(examples=["not_found", "rate_limited"])]
    message: str


class ErrorJSON(TypedDict):
    error: ErrorDetailJSON


class TableJSON(TypedDict):
    page: Annotated[
        int,
        Schema(minimum=1, description="The PDF page or TIFF page (1 for any other document)."),
    ]
    rows: Annotated[
        list[list[str | None]],
        Schema(
            description="The grid: every row as long; a spanning cell's text at its top-left "
            "position, the cells it covers null."
        ),
    ]
    confidence: Annotated[
        list[list[Annotated[float | None, Schema(minimum=0, maximum=1)]]] | None,
        Schema(
            description="Per cell, how sure OCR is of its text (0-1, null for an empty cell), "
            "in the shape of rows; null when the text comes from a PDF's text layer "
            "or a CSV, TSV or JSON document."
        ),
    ]


class ResultDocumentJSON(DocumentJSON):
    line_items: Annotated[
        list[dict[str, Any]] | None,
        Schema(
            description="The extracted rows; null unless the document succeeded. The first "
            "table's header row gives the keys; a later table is appended only when "
            "it continues the first (a table split over pages: next page, same "
            "columns); other tables are in `tables` only."
        ),
    ]
    tables: Annotated[
        list[TableJSON] | None,
        Schema(
            description="Every table found, in reading order (page, then top to bottom). For "
            "CSV, TSV and JSON one table: the line_items as a grid, the header row "
            "of their keys first. Null unless the document succeeded (and for "
            "results stored before tables existed); [] when a plug-in extractor "
            "reports rows only."
        ),
    ]


class BatchResultsJSON(BatchJSON):
    documents: list[ResultDocumentJSON]
    next_cursor: NextCursor


class BatchListJSON(TypedDict):
    batches: list[BatchJSON]
    next_cursor: NextCursor


class DeliveryListJSON(TypedDict):
    deliveries: list[DeliveryJSON]
    next_cursor: NextCursor


def delivery_list(found: list[Delivery], next_cursor: str | None) -> DeliveryListJSON:
    """A page of deliveries (``GET .../deliveries``, ``GET /deliveries``)."""
    return {"deliveries": [d.to_json() for d in found], "next_cursor": next_cursor}


class EventListJSON(TypedDict):
    events: Annotated[
        list[FeedEvent],
        Schema(
            description="Oldest first: each event's id (its webhook-id), type, "
            "timestamp and data, as its webhook body has them."
        ),
    ]
    next_cursor: Annotated[
        str | None,
        Schema(
            pattern=DELIVERY_ID_PATTERN,
            description="The id of the last event read (pass it as `after`); the "
            "`after` given when there was none; null when the feed is empty.",
        ),
    ]
    has_more: Annotated[
        bool, Schema(description="More events follow now: read again without waiting.")
    ]


# Every component made from a type: the records', the events' and these.
COMPONENTS: dict[type, str] = {
    **EVENTS,
    **components(
        ErrorJSON,
        TableJSON,
        ResultDocumentJSON,
        BatchResultsJSON,
        BatchListJSON,
        DeliveryListJSON,
        EventListJSON,
    ),
}
