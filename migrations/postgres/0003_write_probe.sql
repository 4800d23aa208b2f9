-- 0003: the write probe's scratch table (backend/postgres/probe.go).
--
-- While store writes fail, every node probes the store with a write of its
-- own, to see writes work again without waiting for an append. Taking a
-- transaction id (the probe before this table) writes only WAL: a server
-- whose data disk alone was full (its WAL elsewhere) passed it while every
-- append that needed a new page failed. The probe empties this table
-- (TRUNCATE gives it a new, empty file), inserts a row, which takes a new
-- page of the data disk as an append that extends the events table does,
-- deletes it and commits. No reader sees a row here, and the table holds
-- at most one page. Nothing else uses it.
CREATE TABLE orisun_write_probe (
    at timestamptz NOT NULL
);
