# jobguard: one user intent, one job.  PGXS build of the extension.
#
#   make && make install      build and install into the PostgreSQL that
#                             $(PG_CONFIG) names
#   make test                 set up everything on a fresh Debian machine, then
#                             run every suite against a throwaway cluster
#                             (PG_MAJORS="15 17 18": also PostgreSQL 17 and 18,
#                             in Debian chroots; see doc/postgresql-versions.md)
#   make demo                 the same set-up, then the double-click story
#   make bench                the benchmark against the SQL floor and the peers
#   make bench-growth         growth, bloat and memory over millions of jobs
#   make test-random          the differential random test, long (10 minutes)
#   make test-valgrind        the SQL suites against a server under valgrind
#   make test-fuzz            sqlsmith and hostile calls in every transaction
#                             context (FUZZ_MINUTES, default 10)
#   make soak                 30 minutes of mixed load, kills and a crash (SOAK_MINUTES)

EXTENSION   = jobguard
MODULE_big  = jobguard
OBJS        = src/jobguard.o src/args.o src/submit.o src/attempts.o src/finish.o src/reading.o src/providers.o src/workers.o src/operating.o src/job_notify.o src/notify_worker.o src/claim_floor.o \
              src/store_dispatch.o src/store_lifecycle.o src/store_sql.o src/store_admin.o src/rows.o src/rows_write.o src/rows_rules.o src/rows_catalog.o \
              src/transitions.o src/attempt_states.o src/derived_check.o src/contract_compile.o src/contract_check.o src/security.o src/scopes.o src/policies.o src/metrics.o src/sweeper.o src/launcher.o src/subxact.o src/schema_level.o src/liveness.o \
              src/schedule.o src/limits.o src/failover.o \
              src/audit.o src/refunds.o
DATA        = jobguard--1.0.sql jobguard--1.0--1.1.sql jobguard--1.1--1.2.sql jobguard--1.2--1.3.sql
PGFILEDESC  = "jobguard - one job per user intent"

JOBGUARD_REGRESS = submit attempts contracts security operations sharding fast_path scopes install update limits key_policy fast_path_rules worker derived_states finish_many key_index liveness flow parallel ranges ranges_sql audit failover
REGRESS      = $(JOBGUARD_REGRESS)
# what make test runs again on the database update leaves behind (updated from 1.0)
REGRESS_ON_UPDATED = $(filter-out install update,$(JOBGUARD_REGRESS))
# what make test runs on a database still on 1.1, served by this library:
# all but the suites of 1.2's own objects (finish_many, liveness, flow,
# parallel, ranges;
# security checks 1.2's dump filter of grants), those that make databases
# of their own, and those of the fast path, which steps aside for 1.1's
# tables (the SQL back end serves them, with 1.1's statements)
REGRESS_ON_PREVIOUS = $(filter-out install update security finish_many liveness flow parallel ranges ranges_sql fast_path fast_path_rules audit failover,$(JOBGUARD_REGRESS))
# what make test runs on a database still on 1.2: all but the suites of
# 1.3's own objects (audit, failover; security lists 1.3's objects), and
# those that make databases of their own
REGRESS_ON_1_2 = $(filter-out install update security ranges_sql audit failover,$(JOBGUARD_REGRESS))
REGRESS_OPTS = --load-extension=jobguard

JOBGUARD_ISOLATION = double_click double_begin timeout_gate reverse_finish concurrent_finish cancel_job_race contract_redefine notify fast_path_ddl scope_race key_policy_race claim_race claim_begin claim_cancel heartbeat_deadline submit_many_race finish_many_race redrive_race claim_unknown_race flow_in_flight_race flow_reschedule_race flow_retry_race failover_route_race failover_define_race failover_set_race refund_race redrive_policy_cache
ISOLATION      = $(JOBGUARD_ISOLATION)
ISOLATION_ON_PREVIOUS = $(filter-out finish_many_race redrive_race redrive_policy_cache claim_unknown_race fast_path_ddl flow_in_flight_race flow_reschedule_race flow_retry_race failover_route_race failover_define_race failover_set_race refund_race,$(JOBGUARD_ISOLATION))
ISOLATION_ON_1_2 = $(filter-out failover_route_race failover_define_race failover_set_race refund_race,$(JOBGUARD_ISOLATION))
ISOLATION_OPTS = --load-extension=jobguard

# what make test runs first in each pass of the pg_regress and isolation
# suites: their sessions saw the jobguard.fast_path the pass names
PASS_CHECK_REGRESS   = pass_setting
PASS_CHECK_ISOLATION = pass_setting_iso

TAP_TESTS = 1

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs 2>/dev/null)

ifneq ($(wildcard $(PGXS)),)
include $(PGXS)
else
# No server development files yet: only the targets that install them work.
all install installcheck:
	@echo "jobguard: PostgreSQL server development files not found (is $(PG_CONFIG) on PATH?)." >&2
	@echo "jobguard: 'make test' or 'make demo' install them on Debian, or: apt-get install postgresql-server-dev-15" >&2
	@exit 1
endif

.PHONY: test demo bench bench-growth test-random test-valgrind test-fuzz soak
test:
	@scripts/run-tests

# the differential random test for RANDOM_MINUTES (default 10) minutes
test-random:
	@scripts/run-random

# the pg_regress and isolation suites on a server run under valgrind
test-valgrind:
	@scripts/run-valgrind

# sqlsmith and jobguard's own hostile calls for FUZZ_MINUTES (default 10)
# minutes; fails on a crash, an internal error, a broken invariant or index,
# or any change of roles or grants (doc/testing.md, "Fuzzing")
test-fuzz:
	@scripts/run-fuzz --minutes $${FUZZ_MINUTES:-10}

# the soak test for SOAK_MINUTES (default 30) minutes; its report in bench/results/soak.md
soak:
	@scripts/run-soak

demo:
	@scripts/run-demo

bench:
	@bench/run

bench-growth:
	@bench/run --growth

# the operator's console (console/, doc/console.md) on JOBGUARD_CONSOLE_PORT
# (default 8787) against the libpq environment; CONSOLE_ARGS=--allow-actions
# for the actions, --base-path /PREFIX behind a reverse proxy
.PHONY: console
console:
	@cd console && { [ -d node_modules ] || npm ci --no-audit --no-fund --loglevel=error; } && exec node server.js $(CONSOLE_ARGS)
