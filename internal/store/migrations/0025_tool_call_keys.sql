-- 0025: tool calls keyed by an id Atrium assigns. Providers (local ones especially)
-- reuse call ids ("call_1", "0" or "" every time), so a result cannot be found by the
-- provider's id. A call's key is "atrium_<assistant message id>_<index in its
-- tool_calls>" (store.ToolCallKey); a tool result row stores the key of the call it
-- answers in call_key. tool_call_id keeps the provider's id, for the wire only.
ALTER TABLE messages ADD COLUMN call_key TEXT NOT NULL DEFAULT '';

-- Backfill: a result answers a call of the nearest earlier assistant message with tool
-- calls in its chat (the agent stores a step, then its results in call order), and the
-- n-th result carrying an id answers the n-th call with that id. A result with no such
-- call keeps call_key '' and pairs with nothing (an orphan, as it was). The agent
-- stores calls as Go encodes llm.ToolCall ({"ID", "Name", "Arguments"}); "id" is read too.
WITH results AS (
	SELECT r.id, r.seq, r.tool_call_id AS call_id,
		(SELECT a.id FROM messages a
			WHERE a.session_id = r.session_id AND a.seq < r.seq AND a.role = 'assistant'
				AND a.tool_calls IS NOT NULL AND json_type(a.tool_calls) = 'array' AND json_array_length(a.tool_calls) > 0
			ORDER BY a.seq DESC LIMIT 1) AS step
	FROM messages r WHERE r.role = 'tool'
), numbered_results AS (
	SELECT id, step, call_id, row_number() OVER (PARTITION BY step, call_id ORDER BY seq) AS n
	FROM results WHERE step IS NOT NULL
), numbered_calls AS (
	SELECT a.id AS step, CAST(j.key AS INTEGER) AS idx, COALESCE(json_extract(j.value, '$.ID'), json_extract(j.value, '$.id'), '') AS call_id,
		row_number() OVER (PARTITION BY a.id, COALESCE(json_extract(j.value, '$.ID'), json_extract(j.value, '$.id'), '') ORDER BY CAST(j.key AS INTEGER)) AS n
	FROM messages a, json_each(a.tool_calls) j
	WHERE a.role = 'assistant' AND a.tool_calls IS NOT NULL AND json_type(a.tool_calls) = 'array'
), matched AS (
	SELECT r.id, 'atrium_' || c.step || '_' || c.idx AS call_key
	FROM numbered_results r JOIN numbered_calls c ON c.step = r.step AND c.call_id = r.call_id AND c.n = r.n
)
UPDATE messages SET call_key = matched.call_key FROM matched WHERE messages.id = matched.id;
