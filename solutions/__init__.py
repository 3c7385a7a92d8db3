"""Reference solutions (instructor only): written once with nbgrader fences; exercises/ is generated from them."""
