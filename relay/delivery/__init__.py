"""Outbound webhook delivery: URL safety (:mod:`.ssrf`) and signatures (:mod:`.signing`)."""
