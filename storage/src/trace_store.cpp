// placeholder until the trace store lands
