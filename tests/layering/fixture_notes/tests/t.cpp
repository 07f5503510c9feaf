// Note [Alpha]: a test's line that starts with a Note cites it (tests never define).
