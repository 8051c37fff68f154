-- The named statements of Work Center: every fixed SQL statement the code runs by hand.
--
-- Each statement starts with `-- name: <name>` and one header line saying what it does and what
-- it locks; a statement whose text differs between the databases gives both, each under
-- `-- postgresql:` / `-- sqlite:`. `workcenter/db/catalogue.py` loads this file once and expands
-- its markers per database: {table:Model} a quoted table name, {col:Model.field} a quoted column,
-- {cols:Spec} a row spec's column list under its alias (the specs of `db/rows.py row_specs()`,
-- by name: WorkItem, Action, Run, GraphAction, Event, WebhookDelivery, User), {insert_cols:Model} and
-- {insert_params:Model} / {typed_params:Model} the columns an insert writes and their
-- placeholders (typed: with the casts PostgreSQL needs in a SELECT list), {counter_sums} the sums
-- of the execution counters. Markers the caller fills at run time: {ids} and {values} (SQLite
-- only: one placeholder, or one (%s, %s) pair, per element). Parameters are positional `%s`.
--
-- The guarded updates are not here: each is built by `db/writes.py` from the values it sets and a
-- named guard of `db/guards.py` (the WHERE of a fenced write, DOMAIN §2.7, §6).
--
-- Locking order (PostgreSQL): the work item row first, then the rows of that item (DOMAIN §2.7).

-- name: claim_first
-- The first claimable action in claim order, with its item. Locks: PostgreSQL the action and item rows, skipping rows another claimer holds (SKIP LOCKED: a claimer never waits).
-- postgresql:
SELECT {cols:Action}, {cols:WorkItem} FROM {table:Action} a JOIN {table:WorkItem} i ON i."id" = a."work_item_id"
WHERE a."claimable" ORDER BY a."updated_at", a."sequence", a."created_at" LIMIT 1 FOR UPDATE OF a, i SKIP LOCKED
-- sqlite:
SELECT {cols:Action}, {cols:WorkItem} FROM {table:Action} a JOIN {table:WorkItem} i ON i."id" = a."work_item_id"
WHERE a."claimable" ORDER BY a."updated_at", a."sequence", a."created_at" LIMIT 1

-- name: claim_after
-- The next claimable action after (updated_at, sequence, created_at), keyset over the partial index wc_action_claimable (no OFFSET scan). Locks: as claim_first.
-- postgresql:
SELECT {cols:Action}, {cols:WorkItem} FROM {table:Action} a JOIN {table:WorkItem} i ON i."id" = a."work_item_id"
WHERE a."claimable" AND (a."updated_at" > %s OR (a."updated_at" = %s AND (a."sequence" > %s
  OR (a."sequence" = %s AND a."created_at" > %s))))
ORDER BY a."updated_at", a."sequence", a."created_at" LIMIT 1 FOR UPDATE OF a, i SKIP LOCKED
-- sqlite:
SELECT {cols:Action}, {cols:WorkItem} FROM {table:Action} a JOIN {table:WorkItem} i ON i."id" = a."work_item_id"
WHERE a."claimable" AND (a."updated_at" > %s OR (a."updated_at" = %s AND (a."sequence" > %s
  OR (a."sequence" = %s AND a."created_at" > %s))))
ORDER BY a."updated_at", a."sequence", a."created_at" LIMIT 1

-- name: claim_more
-- Whether another action is claimable beside the one a claim takes (a hint for the waiting claims: one commit can make several claimable), in claim order so that it reads the partial index wc_action_claimable however many actions are not claimable. Runs as the claim's write batch's tail: on PostgreSQL it sees the rows before the batch. Locks: nothing.
SELECT a."id" FROM {table:Action} a WHERE a."claimable" AND a."id" <> %s
ORDER BY a."updated_at", a."sequence", a."created_at" LIMIT 1

-- name: claim_peek
-- The first claimable actions in claim order, read without locks: a claim that found nothing compares them with the candidates it read, and one it never read was skipped because another transaction held its action or item row (PostgreSQL). Locks: nothing.
SELECT a."id" FROM {table:Action} a WHERE a."claimable" ORDER BY a."updated_at", a."sequence", a."created_at" LIMIT %s

-- name: running_in_workspace
-- The (workspace mode, item id) of every running action in one workspace (DOMAIN §5.4). Locks: nothing (the caller holds the workspace's advisory lock).
SELECT a."workspace_mode", a."work_item_id" FROM {table:Action} a JOIN {table:WorkItem} i ON i."id" = a."work_item_id"
WHERE a."status" = %s AND i."workspace_key" = %s

-- name: lease_all
-- A run, its action and its item (full rows) in one joined read, for the fence of DOMAIN §6.1. Locks: PostgreSQL the item, run and action rows, the item first; a row that changed while its lock was awaited is returned as committed.
-- postgresql:
SELECT {cols:Run}, {cols:Action}, {cols:WorkItem} FROM {table:WorkItem} i JOIN {table:Run} r ON r."work_item_id" = i."id"
JOIN {table:Action} a ON a."id" = r."action_id" WHERE r."id" = %s FOR UPDATE OF i, r, a
-- sqlite:
SELECT {cols:Run}, {cols:Action}, {cols:WorkItem} FROM {table:WorkItem} i JOIN {table:Run} r ON r."work_item_id" = i."id"
JOIN {table:Action} a ON a."id" = r."action_id" WHERE r."id" = %s

-- name: graph_actions
-- An item's actions by sequence, the columns graph refresh and the claimable flags read (DOMAIN §5.3, §7.6). Locks: nothing (the caller holds the item).
SELECT {cols:GraphAction} FROM {table:Action} a WHERE a."work_item_id" = %s ORDER BY a."sequence"

-- name: run_insert
-- A new run; its progress_revision continues from the action's earlier runs (DOMAIN §5.6). Locks: nothing beyond the inserted row.
INSERT INTO {table:Run} ({insert_cols:Run}, "progress_revision") VALUES ({insert_params:Run},
  (SELECT COALESCE(MAX("progress_revision"), 0) + 1 FROM {table:Run} WHERE "action_id" = %s))

-- name: event_insert
-- One event row. Locks: PostgreSQL the event-order key SHARED before the id is drawn, held to commit (the function scan runs before the id default; the last parameter is the key).
-- postgresql:
INSERT INTO {table:Event} ({insert_cols:Event}) SELECT {typed_params:Event} FROM pg_advisory_xact_lock_shared(%s)
-- sqlite:
INSERT INTO {table:Event} ({insert_cols:Event}) VALUES ({insert_params:Event})

-- name: event_order_lock
-- Waits for every event id already drawn to commit and holds back new ones (a stream read). Locks: the event-order key EXCLUSIVE to the end of the transaction (PostgreSQL only).
SELECT pg_advisory_xact_lock(%s)

-- name: event_order_try_lock
-- event_order_lock if the key is free right now: returns whether it was granted. Locks: as event_order_lock, or nothing (PostgreSQL only).
SELECT pg_try_advisory_xact_lock(%s)

-- name: workspace_try_lock
-- Takes one workspace's key if no one holds it: returns whether it was granted (a claim never waits; DOMAIN §5.4). Locks: the workspace's advisory key to the end of the transaction, or nothing (PostgreSQL only).
SELECT pg_try_advisory_xact_lock(%s)

-- name: detail_item
-- One work item (the detail's first read). Locks: nothing.
SELECT {cols:WorkItem} FROM {table:WorkItem} i WHERE i."id" = %s

-- name: detail_actions
-- An item's actions by sequence. Locks: nothing.
SELECT {cols:Action} FROM {table:Action} a WHERE a."work_item_id" = %s ORDER BY a."sequence"

-- name: detail_runs
-- An item's runs, newest first. Locks: nothing.
SELECT {cols:Run} FROM {table:Run} r WHERE r."work_item_id" = %s ORDER BY r."started_at" DESC, r."id" DESC

-- name: detail_events
-- An item's newest events (the second parameter: how many). Locks: nothing.
SELECT {cols:Event} FROM {table:Event} e WHERE e."work_item_id" = %s ORDER BY e."id" DESC LIMIT %s

-- name: events_previous
-- For each (event id, item id): the largest stored event id below it, overall and in its item. Locks: nothing (run inside a stream read).
-- postgresql:
SELECT b."id", (SELECT MAX(e."id") FROM {table:Event} e WHERE e."id" < b."id"),
  (SELECT MAX(e."id") FROM {table:Event} e WHERE e."work_item_id" = b."item" AND e."id" < b."id")
FROM unnest(%s::bigint[], %s::text[]) AS b("id", "item")
-- sqlite:
WITH b("id", "item") AS (VALUES {values})
SELECT b."id", (SELECT MAX(e."id") FROM {table:Event} e WHERE e."id" < b."id"),
  (SELECT MAX(e."id") FROM {table:Event} e WHERE e."work_item_id" = b."item" AND e."id" < b."id")
FROM b

-- name: summary_items
-- Several items with their current action's id, type, stage and status (WorkItemSummary). Locks: nothing.
-- postgresql:
SELECT {cols:WorkItem}, a."id", a."type", a."stage_id", a."status" FROM {table:WorkItem} i
LEFT JOIN {table:Action} a ON a."id" = i."current_action_id" WHERE i."id" = ANY(%s::text[])
-- sqlite:
SELECT {cols:WorkItem}, a."id", a."type", a."stage_id", a."status" FROM {table:WorkItem} i
LEFT JOIN {table:Action} a ON a."id" = i."current_action_id" WHERE i."id" IN ({ids})

-- name: summary_counts
-- Action counts by status of several items. Locks: nothing.
-- postgresql:
SELECT "work_item_id", "status", COUNT(*) FROM {table:Action} WHERE "work_item_id" = ANY(%s::text[])
GROUP BY "work_item_id", "status"
-- sqlite:
SELECT "work_item_id", "status", COUNT(*) FROM {table:Action} WHERE "work_item_id" IN ({ids})
GROUP BY "work_item_id", "status"

-- name: summary_stats
-- Execution counters summed over the runs of several items. Locks: nothing.
-- postgresql:
SELECT "work_item_id", {counter_sums} FROM {table:Run} WHERE "work_item_id" = ANY(%s::text[]) GROUP BY "work_item_id"
-- sqlite:
SELECT "work_item_id", {counter_sums} FROM {table:Run} WHERE "work_item_id" IN ({ids}) GROUP BY "work_item_id"

-- name: token_user
-- A live API token's user by token prefix, with the token's id and hash and whether last_used_at is due (older than the first parameter). Locks: nothing.
SELECT {cols:User}, t."id" AS token_id, t."token_hash" AS token_digest,
  (t."last_used_at" IS NULL OR t."last_used_at" <= %s) AS token_touch, NULL AS token_holds
FROM {table:ApiToken} t INNER JOIN {table:User} u ON u.{col:User.pk} = t."user_id"
WHERE t."prefix" = %s AND t."revoked_at" IS NULL ORDER BY t."id" LIMIT 1

-- name: token_user_permission
-- token_user, and whether the user holds permission app_label.codename (the second and third parameters) directly or through a group, from the tables ModelBackend reads. Locks: nothing.
SELECT {cols:User}, t."id" AS token_id, t."token_hash" AS token_digest,
  (t."last_used_at" IS NULL OR t."last_used_at" <= %s) AS token_touch,
  EXISTS (SELECT 1 FROM {table:Permission} p INNER JOIN {table:ContentType} ct ON ct."id" = p."content_type_id"
    WHERE ct."app_label" = %s AND p."codename" = %s AND (
      p."id" IN (SELECT up.{col:UserPermissions.permission} FROM {table:UserPermissions} up
                 WHERE up.{col:UserPermissions.user} = u.{col:User.pk})
      OR p."id" IN (SELECT gp.{col:GroupPermissions.permission} FROM {table:GroupPermissions} gp
                    INNER JOIN {table:UserGroups} ug ON ug.{col:UserGroups.group} = gp.{col:GroupPermissions.group}
                    WHERE ug.{col:UserGroups.user} = u.{col:User.pk}))) AS token_holds
FROM {table:ApiToken} t INNER JOIN {table:User} u ON u.{col:User.pk} = t."user_id"
WHERE t."prefix" = %s AND t."revoked_at" IS NULL ORDER BY t."id" LIMIT 1

-- name: webhook_outbox
-- The deliveries of the event just written (the outbox, in the event's transaction): one per active webhook that takes its type and its item's workflow template. PostgreSQL reads the event's id from the write batch's previous statement ({prev}); SQLite binds it. Locks: nothing (new rows).
-- postgresql:
INSERT INTO {table:WebhookDelivery} ("webhook_id", "event_id", "status", "attempts", "failures", "next_attempt_at", "last_error", "created_at")
SELECT w."id", e."id", 'pending', 0, 0, %s::timestamptz, '', %s::timestamptz
FROM {prev} e JOIN {table:WorkItem} i ON i."id" = %s
JOIN {table:Webhook} w ON w."active" AND strpos(w."type_match", %s) > 0 AND (w."workflow" = '' OR w."workflow" = i."workflow_template")
-- sqlite:
INSERT INTO {table:WebhookDelivery} ("webhook_id", "event_id", "status", "attempts", "failures", "next_attempt_at", "last_error", "created_at")
SELECT w."id", e."id", 'pending', 0, 0, %s, '', %s
FROM (SELECT %s AS "id") e JOIN {table:WorkItem} i ON i."id" = %s
JOIN {table:Webhook} w ON w."active" AND instr(w."type_match", %s) > 0 AND (w."workflow" = '' OR w."workflow" = i."workflow_template")

-- name: webhook_heads
-- The deliveries due now that stand first in their active webhook's order (the lowest pending event id of each, up to the event id every writer has settled: the first parameter), soonest due first. Locks: PostgreSQL the delivery rows, skipping those another sender holds (SKIP LOCKED: the webhook's next delivery waits behind its head, so order holds); SQLite leaves out heads another sender has claimed.
-- postgresql:
SELECT {cols:WebhookDelivery}
FROM {table:WebhookDelivery} d
JOIN (SELECT "webhook_id", MIN("event_id") AS "event_id" FROM {table:WebhookDelivery}
      WHERE "status" = 'pending' AND "event_id" <= %s GROUP BY "webhook_id") h
  ON h."webhook_id" = d."webhook_id" AND h."event_id" = d."event_id"
JOIN {table:Webhook} w ON w."id" = d."webhook_id" AND w."active"
WHERE d."status" = 'pending' AND d."next_attempt_at" <= %s
ORDER BY d."next_attempt_at" LIMIT %s FOR UPDATE OF d SKIP LOCKED
-- sqlite:
SELECT {cols:WebhookDelivery}
FROM {table:WebhookDelivery} d
JOIN (SELECT "webhook_id", MIN("event_id") AS "event_id" FROM {table:WebhookDelivery}
      WHERE "status" = 'pending' AND "event_id" <= %s GROUP BY "webhook_id") h
  ON h."webhook_id" = d."webhook_id" AND h."event_id" = d."event_id"
JOIN {table:Webhook} w ON w."id" = d."webhook_id" AND w."active"
WHERE d."status" = 'pending' AND d."next_attempt_at" <= %s AND (d."claimed_until" IS NULL OR d."claimed_until" < %s)
ORDER BY d."next_attempt_at" LIMIT %s

-- name: event_settled_max
-- The highest event id: under the stream read (events.stream_read) every id up to it has committed or rolled back. Locks: nothing.
SELECT COALESCE(MAX("id"), 0) FROM {table:Event}

-- name: webhook_followers
-- The pending deliveries of one webhook right after its head (event id above the second parameter, up to the settled id of the third), in event order: what a sender sends after the head, in the same attempt. Locks: PostgreSQL those rows (waiting for a redelivery's short write rather than skipping a row, which would break the order).
-- postgresql:
SELECT {cols:WebhookDelivery}
FROM {table:WebhookDelivery} d
WHERE d."webhook_id" = %s AND d."status" = 'pending' AND d."event_id" > %s AND d."event_id" <= %s
ORDER BY d."event_id" LIMIT %s FOR UPDATE
-- sqlite:
SELECT {cols:WebhookDelivery}
FROM {table:WebhookDelivery} d
WHERE d."webhook_id" = %s AND d."status" = 'pending' AND d."event_id" > %s AND d."event_id" <= %s
ORDER BY d."event_id" LIMIT %s

-- name: run_log_match
-- The ids of the log chunks whose text holds a string, case-insensitive, through the search index of migration 0010: PostgreSQL ILIKE (the parameter a LIKE pattern, %text%) over the trigram index wc_runlogchunk_trgm; SQLite a phrase (the parameter a quoted FTS5 phrase) of the trigram FTS5 table wc_runlogchunk_fts. A subquery of log search (run_logs.search). Locks: nothing.
-- postgresql:
SELECT "id" FROM {table:RunLogChunk} WHERE "text" ILIKE %s
-- sqlite:
SELECT rowid FROM "wc_runlogchunk_fts" WHERE "wc_runlogchunk_fts" MATCH %s
