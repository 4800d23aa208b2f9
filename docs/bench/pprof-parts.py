#!/usr/bin/env python3
"""pprof-parts.py RAW [RAW…]: the CPU of a profile by part of orisun's path, each sample counted
once, for the first part (in the order below) whose pattern matches its stack (the frames joined
leaf first). RAW is the output of `go tool pprof -raw BINARY PROFILE`, of the node's process or of
the api workload's client process (docs/performance.md, "Where the time goes")."""
import re, sys
from collections import OrderedDict

PARTS = [
    ("raw insert (phase 1, before the api rows)", r"bench\.\(\*runner\)\.rawInsert"),
    # the client process
    ("client: encoding the request (json.Marshal, RawMessage data compacted and HTML-escaped; since issue 22 encodeAppend)", r"encoding/json\.Marshal .*orisun/client\.\(\*Client\)\.request|orisun/client\.encodeAppend"),
    ("client: decoding the reply (json.Unmarshal)", r"encoding/json\.Unmarshal .*orisun/client\.\(\*Client\)\.(request|send)"),
    ("client: the NATS request (inbox, publish, wait)", r"nats%2ego\.\(\*Conn\)\.RequestWithContext .*orisun/client\."),
    ("client: the rest of Append (checks)", r"orisun/client\."),
    ("bench client loop (ids, inputs)", r"orisun/bench\.runClient"),
    # the node's process
    ("bench bookkeeping (meter, status polls)", r"orisun/bench\.|orisun\.\(\*Node\)\.Status"),
    ("API: request decoding (encoding/json Decoder into AppendRequest, duplicate-key scan; since issue 22 decodeAppend's one pass)", r"api/service\.(decode|decodeAppend|fastAppend) "),
    ("event.Prepare: compacting data and metadata (json.Compact)", r"orisun/event\.compactJSON "),
    ("event.Prepare: stream.EncodedSize", r"orisun/stream\.EncodedSize "),
    ("event.Prepare: the rest (ids, validation)", r"orisun/event\.Prepare "),
    ("store: Append's request queueing and wait", r"backend/(postgres|sqlite)\.\(\*Store\)\.Append "),
    ("API: the rest of each request (goroutine and its stack, context, reply, micro dispatch)", r"api/service\.|nats\.go/micro\."),
    ("group commit: the worker (statement building: pgx encoding of the 1 KB values; round trips)", r"backend/postgres\.\(\*Store\)\.(worker|commitGroup)|backend/sqlite\.\(\*Store\)\.(writer|commit)"),
    ("publisher: reading the events back (Store.Read)", r"publisher\.\(\*run\)\.read "),
    ("publisher: building and publishing messages", r"publisher\.\(\*flight\)\.send "),
    ("publisher: acknowledgements (nats.go jetstream ack decoding, awaiting)", r"jetstream\.\(\*jetStream\)\.handleAsyncReply|publisher\.\(\*flight\)\.settleOrWake|publisher\.\(\*run\)\.await"),
    ("publisher: the rest (checkpoints, state)", r"orisun/publisher\."),
    ("NATS server: JetStream storing messages (stream loop, memory store)", r"nats-server/v2/server\.\(\*stream\)\.|nats-server/v2/server\.\(\*memStore\)\."),
    ("NATS server: client connections (parse, route, deliver)", r"nats-server/v2/server\.\(\*client\)\."),
    ("NATS server: the rest", r"nats-server/v2/"),
    ("NATS client connections (read loops, flushers)", r"nats%2ego\."),
    ("pgx outside the store's functions (pool, reading replies)", r"jackc/pg"),
    ("garbage collector (background marking, sweeping, scavenging)", r"runtime\.(gcBgMarkWorker|bgsweep|bgscavenge)"),
    ("scheduler, idle and system", r"runtime\.(schedule|findRunnable|mcall|park_m|mstart|sysmon|morestack)"),
]

def load(path):
    locs, samples, sec = {}, [], None
    cur = None
    for line in open(path):
        if line.startswith("Samples:"): sec = "s"; continue
        if line.startswith("Locations"): sec = "l"; continue
        if line.startswith("Mappings"): sec = None; continue
        if sec == "s":
            m = re.match(r"\s*(\d+)\s+(\d+):\s*(.*)$", line)
            if m:
                samples.append((int(m.group(2)), [int(x) for x in m.group(3).split()]))
        elif sec == "l":
            m = re.match(r"\s*(\d+): 0x[0-9a-f]+ M=\d+ (\S+)", line)
            if m:
                cur = int(m.group(1)); locs[cur] = [m.group(2)]
            else:
                m = re.match(r"\s+(\S+) \S+:\d+", line)
                if m and cur is not None:
                    locs[cur].append(m.group(1))
    return locs, samples

for path in sys.argv[1:]:
    locs, samples = load(path)
    total = sum(ns for ns, _ in samples)
    by = OrderedDict((name, 0) for name, _ in PARTS); by["other"] = 0
    pats = [(n, re.compile(p)) for n, p in PARTS]
    for ns, stack in samples:
        joined = " ".join(f for lid in stack for f in locs.get(lid, [])) + " "
        for n, p in pats:
            if p.search(joined):
                by[n] += ns; break
        else:
            by["other"] += ns
    raw = by["raw insert (phase 1, before the api rows)"]
    print(f"{path}: {total/1e9:.2f} s of samples, {raw/1e9:.2f} s of them the raw insert; shares below are of the {(total-raw)/1e9:.2f} s left")
    for n, ns in by.items():
        if ns and not n.startswith("raw insert"):
            print(f"  {ns/1e9:6.2f} s  {100*ns/(total-raw):5.1f}%  {n}")
