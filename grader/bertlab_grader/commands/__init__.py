"""Commands that drive the other rooms: ``bertlab demo`` and ``bertlab doctor``."""
