"""The live study page: ``autoresearch serve`` (a Starlette app with a JSON API under /api/) and
``autoresearch report --html`` (the same page as one file). Sits above ``api``, below ``cli``.
"""
