"""Errors the connector raises, and the one place that decides between failing and warning on data loss."""

from __future__ import annotations

import logging

from gregor.spark.options import GregorOptionError

log = logging.getLogger("gregor.spark")

__all__ = ["DataLossError", "GregorOptionError", "GregorSourceError", "report_data_loss"]

_FAIL_HINT = (" Some data may have been lost because they are not available in the broker any more; either the "
              "data was aged out (retention, DeleteRecords) or the topic may have been deleted before all its data "
              "was processed. If you don't want your query to fail on such cases, set the source option "
              "'failOnDataLoss' to 'false'.")
_WARN_HINT = (" Some data may have been lost because they are not available in the broker any more; either the "
              "data was aged out or the topic may have been deleted before all its data was processed. If you want "
              "your query to fail on such cases, set the source option 'failOnDataLoss' to 'true'.")


class GregorSourceError(RuntimeError):
    """The broker cannot serve what the query asks for (timeouts, client errors)."""


class DataLossError(GregorSourceError):
    """Offsets the query must read are gone (or went backwards) and failOnDataLoss is true."""


def report_data_loss(fail_on_data_loss: bool, message: str) -> None:
    """Spark's Kafka source rule: fail when asked to, otherwise log and carry on with what exists."""
    if fail_on_data_loss:
        raise DataLossError(message + "." + _FAIL_HINT)
    log.warning("%s.%s", message, _WARN_HINT)
