"""Running untrusted submissions: ``Sandbox`` (launcher.py, the trusted side), ``bubblewrap.py`` (the
confinement, its errors and ``bubblewrap_status``) and ``inside/`` (the only kit code that runs inside
bubblewrap, mounted there alone). Import each name from the module that defines it: the package holds
none, so importing a sibling (the wire format, the malloc pin) never starts the trusted side's imports.
"""
