-- 0002: the live nodes, for boundary placement (placement.go).
--
-- Every node on this database writes a heartbeat here every third of its
-- lease TTL, in the database's clock, and counts the nodes whose heartbeat
-- is fresher than one lease TTL: a node whose store is down stops beating
-- and stops being counted, so the others take its share. A node deletes its
-- row when it stops cleanly; the row of a node that died ages out and is
-- pruned by the others. holder is the lease holder name (the node id plus
-- a random part unique to the process: the process's instance token), so
-- two processes given one node id count as two, and each finds the other:
-- a row of its node_id written by another holder after its own row's
-- started_at is a live twin (a copied data directory), which the node
-- reports. Applied under the migrations' advisory lock like every version,
-- so nodes starting at once create the table once.
CREATE TABLE orisun_nodes (
    holder       text        NOT NULL,
    node_id      text        NOT NULL,
    started_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    heartbeat_at timestamptz NOT NULL,
    CONSTRAINT orisun_nodes_pkey PRIMARY KEY (holder)
);
