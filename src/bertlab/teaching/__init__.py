"""Each task's teaching knowledge, one file per task: the idea to reread when a value is wrong
(``IDEA``), its known mistakes with the hint a student gets (``MISTAKES``), and the probes that
measure what a returned value cannot show (a backward step, run where the code under test runs).

``any_task.py`` holds the kinds of failure any task can show. Everything that teaches reads from
here: ``bertlab.mistakes`` (the table, by id), ``bertlab.probes`` (the probes, by name),
``bertlab check``'s hints, the public and hidden suites' messages, the grader's hints. A hint says
what to change and why, never the solution: these texts ship to students on purpose.
"""
