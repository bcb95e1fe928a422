"""Documents generated from an App: its AsyncAPI description (``reventless docs asyncapi``).

``asyncapi.document(app, brokers=[...])`` is the AsyncAPI 3.0 document of the App's topics,
channels per broker, messages and operations; ``schemas.TopicSchemas`` the JSON Schemas of
its events. Pure: declarations in, a JSON-ready dict out. (The gateway's OpenAPI document
lives with the gateway: ``reventless.gateway.openapi``.)

Example::

    from reventless.docs.asyncapi import document

    doc = document(app, brokers=["nats://127.0.0.1:4222"])
"""
