-- 0030: each model of a provider may have its own context window, entered by an admin
-- or reported by the endpoint's model list: {"model": {"tokens": N, "reported": true}}.
-- A model without an entry uses the instance's window (ATRIUM_CONTEXT_WINDOW).
ALTER TABLE providers ADD COLUMN model_windows TEXT NOT NULL DEFAULT '{}'
	CHECK (json_valid(model_windows) AND json_type(model_windows) = 'object');
