/* jobguard--1.2--1.3.sql: update jobguard 1.2 to 1.3 */

-- complain if script is sourced in psql, rather than via ALTER EXTENSION
\echo Use "ALTER EXTENSION jobguard UPDATE TO '1.3'" to load this file. \quit

/*
 * What 1.3 adds to the SQL of 1.2 (doc/reference.md, "Version 1.3").
 * CREATE EXTENSION jobguard runs the 1.0 script and every update after
 * it, ending with this one; ALTER EXTENSION jobguard UPDATE on a 1.2
 * database runs this script alone.  Each 1.3 object is written here once.
 *
 * The 1.3 library also serves a 1.2 database that has not run this script
 * yet.  An object created here gets the default privileges the updating
 * role has in force: each part below takes them back for its own objects
 * and gives the clients and operators of the updated database what new
 * ones get.
 *
 * Two parts:
 *   1. Failover routes, certification bound to the contract, pausing a
 *      provider.
 *   2. What an operator did (operator_actions), and what is owed back
 *      (lost_results, mark_refunded).
 */

---------------------------------------------------------------------------
-- Part 1. Failover routes, certification bound to the contract, pausing
---------------------------------------------------------------------------

---------------------------------------------------------------------------
-- Part 2. What an operator did, and what is owed back
---------------------------------------------------------------------------
