"""Tiny inputs several tests share: a solid-colour JPEG and a one-op Dagster job."""

import io

from dagster import job, op
from PIL import Image


def solid_jpeg(colour: str = "red", px: int = 300) -> bytes:
    """A ``px`` x ``px`` JPEG of one colour (a PIL colour name or ``#rrggbb``)."""
    buf = io.BytesIO()
    Image.new("RGB", (px, px), colour).save(buf, "JPEG")
    return buf.getvalue()


@op
def _one() -> int:
    return 1


@job
def tiny_job():
    """One op that returns 1: a run to record in an instance, for the tests of run bookkeeping."""
    _one()
