-- bench/wal-designs/drain-by.sql: d.drain_by(claim, finish), a one-table
-- drain in one session: claim (a statement returning the ids it claimed),
-- commit, then finish ($1: one id) for each, each its own transaction.
CREATE PROCEDURE d.drain_by(claim text, finish text) LANGUAGE plpgsql AS $$
DECLARE
  ids bigint[];
  i bigint;
BEGIN
  LOOP
    EXECUTE 'WITH c AS (' || claim || ') SELECT array_agg(id) FROM c' INTO ids;
    COMMIT;
    EXIT WHEN ids IS NULL;
    FOREACH i IN ARRAY ids LOOP
      EXECUTE finish USING i;
      COMMIT;
    END LOOP;
  END LOOP;
END $$;
