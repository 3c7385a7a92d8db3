"""The only kit code that runs inside bubblewrap, beside student code: the sandboxed server and the wire format.

It imports nothing of the grader (only the student package ``bertlab``, torch and the standard library), and
its modules import one another relatively: inside the sandbox this folder is mounted alone, under another name.
"""
