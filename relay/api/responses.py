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


# A box on the page: fractions of its width and height, origin at its top-left corner.
Box = Annotated[
    list[Annotated[float, Schema(minimum=0, maximum=1)]],
    Schema(
        minItems=4,
        maxItems=4,
        description="[x0, y0, x1, y1] (x0 < x1, y0 < y1) as fractions of the page's width "
        "and height, 0-1, rounded to 4 decimals; origin at the top-left corner of the page "
        "as displayed (a PDF page's CropBox with its /Rotate applied, an image after its "
        "EXIF orientation), x to the right, y down. The same for PDF text, images and scans: "
        "laid over the rendered page as CSS percentages.",
    ),
]


class TableCellJSON(TypedDict):
    row: Annotated[int, Schema(minimum=0, description="The row (0-based index into rows).")]
    col: Annotated[int, Schema(minimum=0, description="The column (0-based).")]
    row_span: Annotated[int, Schema(minimum=1, description="How many rows the cell covers.")]
    col_span: Annotated[int, Schema(minimum=1, description="How many columns the cell covers.")]
    bbox: Annotated[
        Box | None,
        Schema(
            description="The cell's region on the page: its ruled box, or in an unruled "
            "table the crossing of its row's and its column's bands (an empty cell has one "
            "too); null when nothing is known (CSV, TSV, JSON, XLSX, DOCX, HTML, a plug-in's "
            "table)."
        ),
    ]


class TableJSON(TypedDict):
    page: Annotated[
        int,
        Schema(
            minimum=1,
            description="The PDF page or TIFF page; for an XLSX its sheet's position in the "
            "workbook (1 for the first sheet); 1 for any other document.",
        ),
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
            "or a CSV, TSV, JSON, XLSX, DOCX or HTML document."
        ),
    ]
    bbox: Annotated[
        Box | None,
        Schema(
            description="The table's box, holding every cell's box; null when nothing is "
            "known (CSV, TSV, JSON, XLSX, DOCX, HTML)."
        ),
    ]
    cells: Annotated[
        list[TableCellJSON],
        Schema(
            description="One cell per anchor (every position of rows no spanning cell "
            "covers, empty ones included), row-major. A cell's text is at "
            "rows[row][col]; the other positions it covers (row_span x col_span) are null "
            "in rows. Together the cells cover every position of rows exactly once."
        ),
    ]


class ResultDocumentJSON(DocumentJSON):
    line_items: Annotated[
        list[dict[str, Any]] | None,
        Schema(
            description="The extracted rows; null unless the document succeeded. The first "
            "table's header row gives the keys; a later table is appended only when "
            "it continues the first (a table split over pages: next page, same "
            "columns; never in an XLSX, DOCX or HTML, whose first table with rows under "
            "its title rows is the one); other tables are in `tables` only."
        ),
    ]
    tables: Annotated[
        list[TableJSON] | None,
        Schema(
            description="Every table found, in reading order (page, then top to bottom). For "
            "CSV, TSV and JSON one table: the line_items as a grid, the header row "
            "of their keys first; for an XLSX every sheet that holds a value, for a DOCX "
            "or an HTML page every table, merged cells as spans. Null unless the "
            "document succeeded (and for results stored before tables existed); [] when "
            "a plug-in extractor reports rows only."
        ),
    ]


class BatchResultsJSON(BatchJSON):
    documents: list[ResultDocumentJSON]
    next_cursor: NextCursor


class UploadedDocumentsJSON(TypedDict):
    documents: Annotated[
        list[DocumentJSON],
        Schema(
            description="The queued documents, one a file part, in the parts' order.",
            minItems=2,
        ),
    ]


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
        TableCellJSON,
        TableJSON,
        ResultDocumentJSON,
        BatchResultsJSON,
        BatchListJSON,
        UploadedDocumentsJSON,
        DeliveryListJSON,
        EventListJSON,
    ),
}
