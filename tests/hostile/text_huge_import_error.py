"""Raises, at import, a SyntaxError whose message is 8 MiB of text with an escape sequence every 4 KiB (the
worker passes a SyntaxError's message on whole): the report must stay small and the terminal output bounded."""
# expect_status: import_error
# expect_score: 0

raise SyntaxError(("x" * 4095 + "\x1b") * 2048)
