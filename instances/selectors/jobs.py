"""instances/selectors/jobs.py: a job's log, read from any byte offset without loading the
rest (its chunks are indexed by where they start), and its TensorBoard scalars for charts."""

from __future__ import annotations

import dataclasses

from instances.models import Job, JobLogChunk, JobScalar, JobWorkdir


@dataclasses.dataclass(frozen=True)
class LogPiece:
    data: bytes
    offset: int
    size: int
    capped: bool
    ended: bool

    @property
    def next_offset(self) -> int:
        return self.offset + len(self.data)

    @property
    def text(self) -> str:
        """The bytes as text: what is not UTF-8 shows as U+FFFD, never an error."""
        return self.data.decode("utf-8", errors="replace")

    def as_dict(self) -> dict:
        return {
            "text": self.text,
            "offset": self.offset,
            "next_offset": self.next_offset,
            "size": self.size,
            "capped": self.capped,
            "ended": self.ended,
        }


def _whole_characters(data: bytes) -> bytes:
    """``data`` without a UTF-8 character cut at its end (the next read starts with it)."""
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte < 0x80:
            return data
        if byte >= 0xC0:
            width = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            return data if back >= width else data[:-back]
    return data


def job_log_read(job: Job, *, offset: int = 0, limit: int = 256 * 1024) -> LogPiece:
    """Up to ``limit`` bytes of the job's log from ``offset`` (clamped to what is held), in two
    queries however long the log: the chunk holding ``offset``, then those after it."""
    size = job.log_bytes
    offset = min(offset, size)
    first = (
        JobLogChunk.objects.filter(job=job, start__lte=offset)
        .order_by("-start")
        .values_list("start", flat=True)
        .first()
    )
    chunks = JobLogChunk.objects.filter(
        job=job, start__gte=first if first is not None else 0, start__lt=offset + limit
    ).order_by("start")
    data = b"".join(bytes(chunk.data) for chunk in chunks)
    begin = offset - (first or 0)
    piece = data[begin : begin + limit]
    end = offset + len(piece)
    if end < size:
        piece = _whole_characters(piece)
    return LogPiece(data=piece, offset=offset, size=size, capped=job.log_capped, ended=job.is_ended)


# Each of a job's tags is drawn (a job keeps up to runs.SCALAR_TAGS_MAX); a chart shows up to
# CHART_POINTS of its points (evenly picked, the first and last always), fewer when the job has
# many tags, so that a page's charts together stay near CHART_POINTS_TOTAL.
CHART_POINTS = 500
CHART_POINTS_MIN = 125
CHART_POINTS_TOTAL = 8_000


def chart_points(tags: int) -> int:
    """The points a chart of one of ``tags`` tags shows at most."""
    return max(CHART_POINTS_MIN, min(CHART_POINTS, CHART_POINTS_TOTAL // max(tags, 1)))


def job_scalar_series(job: Job) -> dict[str, list[list[float]]]:
    """The job's TensorBoard scalars, every tag: [[step, value], ...] by step, in one query."""
    series: dict[str, list[list[float]]] = {}
    rows = JobScalar.objects.filter(job=job).order_by("tag", "step")
    for tag, step, value in rows.values_list("tag", "step", "value"):
        series.setdefault(tag, []).append([step, value])
    most = chart_points(len(series))
    for tag, points in series.items():
        if len(points) > most:
            every = (len(points) - 1) / (most - 1)
            series[tag] = [points[round(i * every)] for i in range(most)]
    return series


def job_archive(job: Job | None) -> bytes | None:
    """The tar archive uploaded with ``job`` as its working folder (None without one): what
    its hosts' agents unpack, and what a re-run or an edited copy takes again."""
    if job is None:
        return None
    upload = JobWorkdir.objects.filter(job=job).first()
    return bytes(upload.data) if upload else None
