"""The scalars a job writes to TensorBoard event files, read with the standard library (the host
agent runs on the host's python3, 3.8 or later, with nothing installed): the agent sends them
to the portal, which draws them on the job's page.

An event file is a TFRecord stream (length, its CRC, the record, its CRC) of ``Event``
protobufs. A scalar is a ``Summary.Value`` holding either ``simple_value`` (TF1, tensorboardX)
or a one-element float tensor (TF2's tf.summary.scalar, Keras' TensorBoard callback). Nothing
else in the file is read. A record still being written (the file ends inside it) is left for
the next pass; the reader keeps each file's offset.
"""

import os
import struct

PREFIX = "events.out.tfevents."


def _varint(data, pos):
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if byte < 0x80:
            return value, pos
        shift += 7


def _fields(data):
    """(field number, wire type, value) of a protobuf message: ints for varints and fixed
    widths (as raw bytes for fixed32/64), bytes for length-delimited fields."""
    pos = 0
    while pos < len(data):
        key, pos = _varint(data, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = _varint(data, pos)
        elif wire == 1:
            value, pos = data[pos : pos + 8], pos + 8
        elif wire == 2:
            size, pos = _varint(data, pos)
            value, pos = data[pos : pos + size], pos + size
        elif wire == 5:
            value, pos = data[pos : pos + 4], pos + 4
        else:
            return
        yield number, wire, value


def _tensor_float(tensor):
    """The value of a one-element DT_FLOAT (1) or DT_DOUBLE (2) TensorProto, else None."""
    dtype, content, floats, doubles = 0, b"", [], []
    for number, wire, value in _fields(tensor):
        if number == 1 and wire == 0:
            dtype = value
        elif number == 4 and wire == 2:
            content = value
        elif number == 5:  # float_val, packed or not
            floats += [v for (v,) in struct.iter_unpack("<f", value)] if wire == 2 else []
            floats += list(struct.unpack("<f", value)) if wire == 5 else []
        elif number == 6:  # double_val
            doubles += [v for (v,) in struct.iter_unpack("<d", value)] if wire == 2 else []
            doubles += list(struct.unpack("<d", value)) if wire == 1 else []
    if dtype == 1:
        values = floats or ([struct.unpack("<f", content)[0]] if len(content) == 4 else [])
    elif dtype == 2:
        values = doubles or ([struct.unpack("<d", content)[0]] if len(content) == 8 else [])
    else:
        return None
    return values[0] if len(values) == 1 else None


def event_scalars(record, run=""):
    """The scalars of one Event record: [(tag, step, value, wall_time)]. ``run`` (the event
    file's folder, e.g. "train") prefixes each tag as TensorBoard shows it."""
    wall_time, step, summary = 0.0, 0, b""
    for number, wire, value in _fields(record):
        if number == 1 and wire == 1:
            wall_time = struct.unpack("<d", value)[0]
        elif number == 2 and wire == 0:
            step = value
        elif number == 5 and wire == 2:
            summary = value
    points = []
    for number, _, item in _fields(summary):
        if number != 1:
            continue
        tag, scalar = "", None
        for field, wire, value in _fields(item):
            if field == 1 and wire == 2:
                tag = value.decode("utf-8", "replace")
            elif field == 2 and wire == 5:
                scalar = struct.unpack("<f", value)[0]
            elif field == 8 and wire == 2:
                scalar = _tensor_float(value)
        if tag and scalar is not None and scalar == scalar:  # NaN is not drawn
            points.append(((run + "/" + tag) if run else tag, step, scalar, wall_time))
    return points


class Scalars:
    """New scalars under a TensorBoard log folder, pass after pass."""

    def __init__(self, root):
        self.root = root
        self.offsets = {}

    def new(self):
        points = []
        for folder, _, names in os.walk(self.root):
            for name in sorted(n for n in names if n.startswith(PREFIX)):
                path = os.path.join(folder, name)
                run = os.path.relpath(folder, self.root)
                points += self._read(path, "" if run == "." else run)
        return points

    def _read(self, path, run):
        points, offset = [], self.offsets.get(path, 0)
        try:
            with open(path, "rb") as events:
                events.seek(offset)
                data = events.read()
        except OSError:
            return points
        pos = 0
        while pos + 12 <= len(data):
            (size,) = struct.unpack("<Q", data[pos : pos + 8])
            end = pos + 12 + size + 4
            if end > len(data):
                break  # the record is still being written
            points += event_scalars(data[pos + 12 : pos + 12 + size], run)
            pos = end
        self.offsets[path] = offset + pos
        return points

    def send(self, call, ids, most=1000):
        """Post the new scalars (``call`` is the agent's portal call) in batches; what the
        portal did not take (an error, a network fault raises) is sent again next time."""
        self.pending = getattr(self, "pending", []) + self.new()
        while self.pending:
            batch = self.pending[:most]
            points = [{"tag": t, "step": s, "value": v, "wall_time": w} for t, s, v, w in batch]
            status, _ = call("scalars/", dict(ids, points=points))
            if status != 200:
                return
            self.pending = self.pending[most:]
