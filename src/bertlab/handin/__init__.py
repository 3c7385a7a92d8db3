"""`bertlab submit`: hand in exactly what was checked.

files.py     which files go in (the task files, and the helper modules of exercises/ they import)
imports.py   run in a fresh process: does each file parse and import? (file, line, error)
manifest.py  MANIFEST.json: each file's sha256, the kit's version, each task's check, the time; and the
             grader's comparison of a manifest with the files it grades
archive.py   the zip, written beside the old one and moved over it only when complete
exchange.py  nbgrader's exchange (`nbgrader submit`), for courses on JupyterHub
command.py   the command itself: copy, check, pack, say what happened
"""
