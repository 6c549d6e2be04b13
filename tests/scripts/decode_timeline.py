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
functions, sources, frames, callstacks, mappings = {}, {}, {}, {}, {}
arg_names, arg_values = {}, {}
default_clock = None
for p in trace.packet:
    if p.sequence_flags & 1:
        interned = {}
        default_clock = None
        if p.HasField("trace_packet_defaults"):
            default_clock = p.trace_packet_defaults.timestamp_clock_id
        functions, sources, frames, callstacks, mappings = {}, {}, {}, {}, {}
        arg_names, arg_values = {}, {}
    d = p.interned_data
    for n in d.event_names:
        interned[n.iid] = n.name
    for s in d.debug_annotation_names:
        arg_names[s.iid] = s.name
    for s in d.debug_annotation_string_values:
        arg_values[s.iid] = s.str.decode()
    for s in d.function_names:
        functions[s.iid] = s.str.decode()
    for s in d.source_paths:
        sources[s.iid] = s.str.decode()
    for m in d.mappings:
        mappings[m.iid] = m
    for f in d.frames:
        if f.mapping_id not in mappings:
            sys.exit("a frame whose mapping is not defined before it")
        text = functions[f.function_name_id]
        if f.HasField("rel_pc") and f.source_path_iid:
            text += "+0x%x" % f.rel_pc
        if f.source_path_iid:
            text += " (%s:%d)" % (sources[f.source_path_iid], f.line_number)
        frames[f.iid] = text
    for c in d.callstacks:
        # Outermost frame first, as Perfetto lists them.
        callstacks[c.iid] = [frames[i] for i in c.frame_ids]
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
        clock = p.timestamp_clock_id if p.HasField("timestamp_clock_id") else default_clock
        if clock != 3 or not p.sequence_flags & 2:
            sys.exit("an event not on CLOCK_MONOTONIC, or not marked as using the "
                     "sequence's state (its defaults and interned data)")
        e = p.track_event
        if e.HasField("callstack_iid"):
            if not p.sequence_flags & 2:
                sys.exit("an interned callstack in a packet that does not say it needs them")
            e = (e, callstacks[e.callstack_iid])
        else:
            e = (e, None)
        if e[0].HasField("name_iid"):
            if not p.sequence_flags & 2:
                sys.exit("an interned name in a packet that does not say it needs them")
            e[0].name = interned[e[0].name_iid]
        # Annotations with interned names or values, resolved as a trace processor does.
        for a in e[0].debug_annotations:
            if a.HasField("name_iid"):
                a.name = arg_names[a.name_iid]
            if a.HasField("string_value_iid"):
                a.string_value = arg_values[a.string_value_iid]
        events.append((p.timestamp, e))

# Trace processors sort events by time: so does this (stable, so a slice's END and the
# next BEGIN at the same time keep their order).
events.sort(key=lambda e: e[0])
open_slices = {}
slices, instants, counters = [], [], {}
flows_out, flows_in = {}, {}
for ts, (e, stack) in events:
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
        instants.append({"track": e.track_uuid, "name": e.name, "ts": ts, "args": args,
                         "callstack": stack})
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
