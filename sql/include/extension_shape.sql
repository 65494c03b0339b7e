-- pg_temp.extension_shape(): everything CREATE EXTENSION jobguard makes,
-- described without OIDs, one line per fact: a database updated from 1.0
-- or from 1.1 must describe the same as one created fresh.  Privileges are compared
-- as far as the owner and PUBLIC hold them (grants to roles are data).
CREATE FUNCTION pg_temp.extension_shape() RETURNS SETOF text
LANGUAGE sql AS $shape$
SELECT line FROM (
	-- tables, views, sequences, indexes: kind and options
	SELECT format('relation %s kind %s options %s', c.oid::regclass, c.relkind, c.reloptions) AS line
	  FROM pg_class c WHERE c.relnamespace = 'jobguard'::regnamespace
	UNION ALL
	-- columns in order, with type, NOT NULL and default
	SELECT format('column %s.%s #%s %s notnull=%s default=%s', c.oid::regclass, a.attname,
				  row_number() OVER (PARTITION BY c.oid ORDER BY a.attnum),
				  format_type(a.atttypid, a.atttypmod), a.attnotnull,
				  pg_get_expr(d.adbin, d.adrelid))
	  FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
	  LEFT JOIN pg_attrdef d ON d.adrelid = c.oid AND d.adnum = a.attnum
	 WHERE c.relnamespace = 'jobguard'::regnamespace
	UNION ALL
	SELECT format('constraint %s on %s: %s', con.conname, con.conrelid::regclass, pg_get_constraintdef(con.oid))
	  FROM pg_constraint con WHERE con.connamespace = 'jobguard'::regnamespace
	UNION ALL
	SELECT format('index %s', pg_get_indexdef(i.indexrelid))
	  FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
	 WHERE c.relnamespace = 'jobguard'::regnamespace
	UNION ALL
	SELECT format('view %s: %s', c.oid::regclass, pg_get_viewdef(c.oid))
	  FROM pg_class c WHERE c.relnamespace = 'jobguard'::regnamespace AND c.relkind = 'v'
	UNION ALL
	SELECT format('function %s: %s', p.oid::regprocedure, pg_get_functiondef(p.oid))
	  FROM pg_proc p WHERE p.pronamespace = 'jobguard'::regnamespace
	UNION ALL
	SELECT format('trigger %s on %s: %s', t.tgname, t.tgrelid::regclass, pg_get_triggerdef(t.oid))
	  FROM pg_trigger t JOIN pg_class c ON c.oid = t.tgrelid
	 WHERE c.relnamespace = 'jobguard'::regnamespace AND NOT t.tgisinternal
	UNION ALL
	SELECT format('type %s', t.oid::regtype)
	  FROM pg_type t WHERE t.typnamespace = 'jobguard'::regnamespace AND t.typtype = 'd'
	UNION ALL
	-- comments on every object of the extension
	SELECT format('comment on %s: %s', pg_describe_object(d.classid, d.objid, d.objsubid), ds.description)
	  FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'jobguard'
	  JOIN pg_description ds ON ds.classoid = d.classid AND ds.objoid = d.objid
	 WHERE d.deptype = 'e'
	UNION ALL
	-- privileges of the owner and PUBLIC on tables, views, sequences, functions
	SELECT format('acl %s: %s %s', c.oid::regclass,
				  CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE 'owner' END, a.privilege_type)
	  FROM pg_class c,
		   aclexplode(coalesce(c.relacl, acldefault(CASE c.relkind WHEN 'S' THEN 's' ELSE 'r' END::"char", c.relowner))) a
	 WHERE c.relnamespace = 'jobguard'::regnamespace AND a.grantee IN (0, c.relowner)
	UNION ALL
	SELECT format('acl %s: %s %s', p.oid::regprocedure,
				  CASE WHEN a.grantee = 0 THEN 'PUBLIC' ELSE 'owner' END, a.privilege_type)
	  FROM pg_proc p, aclexplode(coalesce(p.proacl, acldefault('f', p.proowner))) a
	 WHERE p.pronamespace = 'jobguard'::regnamespace AND a.grantee IN (0, p.proowner)
	UNION ALL
	SELECT format('extension members: %s', count(*))
	  FROM pg_depend d JOIN pg_extension e ON e.oid = d.refobjid AND e.extname = 'jobguard'
	 WHERE d.deptype = 'e'
	UNION ALL
	SELECT format('config tables: %s', (SELECT array_agg(x::regclass::text ORDER BY x::regclass::text)
										  FROM unnest(e.extconfig) x))
	  FROM pg_extension e WHERE e.extname = 'jobguard'
) facts
ORDER BY line
$shape$;
