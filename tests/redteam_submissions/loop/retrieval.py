"""Never finishes importing: only retrieval may fail for it."""
while True:
    pass
