"""Documents generated from an App: its AsyncAPI description (``reventless docs asyncapi``)."""
