"""The router function: admits requests for its model and answers with results."""
