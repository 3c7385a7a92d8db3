"""How closely two amounts of points must agree to be the same: the one tolerance for points.

Points are sums of fractions (a test worth 2.5, a performance band worth 0.8 of 10), so two ways of
adding the same points can differ by float round-off; they never differ by less than 0.01 on purpose.
"""

POINTS_EPSILON = 1e-6
