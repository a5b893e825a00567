-- sqlite3 workload of bench/run: a database of 1,000,000 rows built in one
-- transaction, indexed and queried (GROUP BY, ORDER BY, a join). Run as
--   sqlite3 DB.db ".read sqlite_rows.sql"    (DB.db removed before each run)
-- The output is deterministic: every allocator's must match glibc's.
PRAGMA journal_mode = OFF;
PRAGMA synchronous = OFF;
PRAGMA cache_size = -65536;
CREATE TABLE item(id INTEGER PRIMARY KEY, grp INTEGER, name TEXT, price REAL, note TEXT);
CREATE TABLE grp(id INTEGER PRIMARY KEY, label TEXT);
BEGIN;
WITH RECURSIVE n(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM n WHERE x < 1000000)
INSERT INTO item
  SELECT x, (x * 7919) % 1000, 'item-' || ((x * 104729) % 999983),
         ((x * 31337) % 100000) / 100.0, substr(hex(x * 2654435761), 1, 4 + x % 24)
  FROM n;
WITH RECURSIVE n(x) AS (SELECT 0 UNION ALL SELECT x + 1 FROM n WHERE x < 999)
INSERT INTO grp SELECT x, 'group-' || printf('%04d', x) FROM n;
COMMIT;
CREATE INDEX item_grp ON item(grp);
SELECT count(*), sum(price), max(length(note)) FROM item;
SELECT CAST(price / 100 AS INTEGER) AS band, count(*), round(avg(price), 4), max(name)
  FROM item GROUP BY band ORDER BY band;
SELECT name, price FROM item ORDER BY price DESC, name LIMIT 5;
SELECT g.label, count(*), round(sum(i.price), 2) FROM item i JOIN grp g ON g.id = i.grp
  WHERE i.price < 50 GROUP BY g.label ORDER BY 3 DESC, 1 LIMIT 5;
SELECT count(*), min(name) FROM item WHERE grp = 77;
