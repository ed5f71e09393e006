-- Budget alerts (docs/tenancy.md, "Budget alerts"): the start of the window whose alert was
-- sent, so that each window alerts once, on whichever node settles the call that crosses the
-- share. A window that starts again has another start: it alerts again. Additive.
ALTER TABLE budget_spending ADD COLUMN alerted_window timestamptz;
