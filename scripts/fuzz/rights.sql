-- scripts/fuzz/rights.sql: every role, membership, owner and ACL that
-- scripts/run-fuzz compares before and after a run (one line each, sorted),
-- in the fuzz database and the cluster's shared catalogs.  Any difference
-- is a finding: nothing a fuzzed call does may change who may do what.
-- Temporary schemas (pg_temp_N) come and go with sessions and are left out.
SELECT line FROM (
	SELECT format('role %s super=%s inherit=%s createrole=%s createdb=%s login=%s replication=%s bypassrls=%s connlimit=%s until=%s config=%s',
	              rolname, rolsuper, rolinherit, rolcreaterole, rolcreatedb, rolcanlogin, rolreplication,
	              rolbypassrls, rolconnlimit, rolvaliduntil, rolconfig) AS line
	  FROM pg_roles
	UNION ALL
	SELECT format('member %s in %s admin=%s grantor=%s', m.member::regrole, m.roleid::regrole, m.admin_option, m.grantor::regrole)
	  FROM pg_auth_members m
	UNION ALL
	SELECT format('database %s owner=%s acl=%s', datname, datdba::regrole, datacl) FROM pg_database
	UNION ALL
	SELECT format('role setting db=%s role=%s %s', setdatabase, setrole, setconfig) FROM pg_db_role_setting
	UNION ALL
	SELECT format('schema %s owner=%s acl=%s', nspname, nspowner::regrole, nspacl) FROM pg_namespace
	 WHERE nspname !~ '^pg_(toast_)?temp_'
	UNION ALL
	SELECT format('relation %s owner=%s acl=%s', c.oid::regclass, c.relowner::regrole, c.relacl)
	  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname !~ '^pg_(toast_)?temp_'
	UNION ALL
	SELECT format('column %s.%s acl=%s', a.attrelid::regclass, a.attname, a.attacl)
	  FROM pg_attribute a WHERE a.attacl IS NOT NULL
	UNION ALL
	SELECT format('routine %s owner=%s acl=%s definer=%s config=%s', p.oid::regprocedure, p.proowner::regrole, p.proacl, p.prosecdef, p.proconfig)
	  FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace WHERE n.nspname !~ '^pg_(toast_)?temp_'
	UNION ALL
	SELECT format('type %s owner=%s acl=%s', t.oid::regtype, t.typowner::regrole, t.typacl)
	  FROM pg_type t JOIN pg_namespace n ON n.oid = t.typnamespace WHERE n.nspname !~ '^pg_(toast_)?temp_'
	UNION ALL
	SELECT format('operator %s owner=%s', o.oid::regoperator, o.oprowner::regrole) FROM pg_operator o
	UNION ALL
	SELECT format('language %s owner=%s acl=%s', lanname, lanowner::regrole, lanacl) FROM pg_language
	UNION ALL
	SELECT format('large object %s owner=%s acl=%s', oid, lomowner::regrole, lomacl) FROM pg_largeobject_metadata
	UNION ALL
	SELECT format('default acl %s %s %s', defaclrole::regrole, defaclnamespace, defaclacl) FROM pg_default_acl
	UNION ALL
	SELECT format('parameter %s acl=%s', parname, paracl) FROM pg_parameter_acl
	UNION ALL
	SELECT format('foreign server %s owner=%s acl=%s', srvname, srvowner::regrole, srvacl) FROM pg_foreign_server
	UNION ALL
	SELECT format('event trigger %s owner=%s', evtname, evtowner::regrole) FROM pg_event_trigger
	UNION ALL
	SELECT format('jobguard grant %s', g) FROM jobguard.grants g
) lines ORDER BY line;
