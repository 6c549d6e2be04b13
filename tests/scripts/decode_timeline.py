"""Decodes an rtm-trace timeline with Perfetto's published schema (PyPI's `perfetto`
package), independently of the tracer's encoder, and prints what it holds as JSON:
tracks, slices (begin/end paired per track), instants, flows and counter values.

    python decode_timeline.py FILE.pftrace OUT.json
"""
import json
import sys

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

TE = pb.TrackEvent

trace = pb.Trace()
with open(sys.argv[1], "rb") as f:
    trace.ParseFromString(f.read())

tracks = {}
clocks = []
events = []
interned = {}
for p in trace.packet:
    if p.sequence_flags & 1:
        interned = {}
    for n in p.interned_data.event_names:
        interned[n.iid] = n.name
    if p.HasField("clock_snapshot"):
        clocks = [c.clock_id for c in p.clock_snapshot.clocks]
    if p.HasField("track_descriptor"):
        d = p.track_descriptor
        t = tracks.setdefault(d.uuid, {"uuid": d.uuid})
        if d.HasField("thread"):
            t.update(kind="thread", pid=d.thread.pid, tid=d.thread.tid)
            if d.thread.thread_name:
                t["name"] = d.thread.thread_name
        elif d.HasField("process"):
            t.update(kind="process", pid=d.process.pid)
            if d.process.process_name:
                t["name"] = d.process.process_name
        elif d.HasField("counter"):
            t.update(kind="counter", name=d.name, parent=d.parent_uuid)
        else:
            t.update(kind="child", name=d.name, parent=d.parent_uuid)
    if p.HasField("track_event"):
        if p.timestamp_clock_id != 3:
            sys.exit("an event not on CLOCK_MONOTONIC")
        e = p.track_event
        if e.HasField("name_iid"):
            if not p.sequence_flags & 2:
                sys.exit("an interned name in a packet that does not say it needs them")
            e.name = interned[e.name_iid]
        events.append((p.timestamp, e))

# Trace processors sort events by time: so does this (stable, so a slice's END and the
# next BEGIN at the same time keep their order).
events.sort(key=lambda e: e[0])
open_slices = {}
slices, instants, counters = [], [], {}
flows_out, flows_in = {}, {}
for ts, e in events:
    args = {a.name: (a.string_value if a.HasField("string_value") else a.int_value)
            for a in e.debug_annotations}
    for f in e.flow_ids:
        flows_out[f] = {"track": e.track_uuid, "ts": ts}
    for f in e.terminating_flow_ids:
        flows_in[f] = {"track": e.track_uuid, "ts": ts}
    if e.type == TE.TYPE_SLICE_BEGIN:
        open_slices.setdefault(e.track_uuid, []).append(
            {"track": e.track_uuid, "name": e.name, "begin": ts, "args": args,
             "correlation": e.correlation_id})
    elif e.type == TE.TYPE_SLICE_END:
        s = open_slices[e.track_uuid].pop()
        s["end"] = ts
        slices.append(s)
    elif e.type == TE.TYPE_INSTANT:
        instants.append({"track": e.track_uuid, "name": e.name, "ts": ts, "args": args})
    elif e.type == TE.TYPE_COUNTER:
        counters.setdefault(str(e.track_uuid), []).append(e.double_counter_value)

unclosed = sum(len(v) for v in open_slices.values())
with open(sys.argv[2], "w") as out:
  json.dump({
    "clocks": clocks,
    "tracks": list(tracks.values()),
    "slices": slices,
    "instants": instants,
    "counters": counters,
    "flows_out": {str(k): v for k, v in flows_out.items()},
    "flows_in": {str(k): v for k, v in flows_in.items()},
    "unclosed": unclosed,
  }, out)
