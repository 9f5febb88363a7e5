"""The report stage's pure half: text renderers for findings and decisions, and the JSON Schemas of every
``--json`` envelope. Nothing here prints; ``jitguard.cli`` prints, the engine integrations log."""
