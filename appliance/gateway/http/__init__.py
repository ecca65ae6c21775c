"""The gateway's HTTP side: the ASGI app, its routes, the server that runs it.

Modules::

    app              GatewayApp / create_app: authentication, admission, dispatch
    routes           ROUTES: every route answered, declared once (path, methods, OpenAPI)
    route_table      Route / RouteTable: the row type and its matcher
    info             the small routes: liveness, readiness, models, metrics
    openapi          the OpenAPI 3.1 document of exactly the surface accepted
    request_schemas  JSON Schemas of the request bodies (for the OpenAPI document)
    server           start_in_thread / serve_until_signal: uvicorn on its own loop
    workers          several gateway processes on one port (``[gateway] workers``)

The top layer of the gateway: may import every other part of it (``chat``,
``responses``, ``state`` and the ``admission``, ``models``, ``auth`` and ``telemetry``
subpackages); nothing of the gateway imports it but the package's public names.
"""
