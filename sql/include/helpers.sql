-- Helpers shared by the regression tests (included with \i from the project root, where pg_regress runs).
-- sqlstate_of: run a statement; show the SQLSTATE and message it raised.
CREATE FUNCTION pg_temp.sqlstate_of(stmt text) RETURNS text
LANGUAGE plpgsql AS $$
BEGIN
	EXECUTE stmt;
	RETURN 'no error';
EXCEPTION WHEN OTHERS THEN
	RETURN SQLSTATE || ': ' || SQLERRM;
END $$;
