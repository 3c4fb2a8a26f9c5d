"""instances/models/fields.py: field shapes several instances tables share."""

# Money in dollars to the micro-dollar (prices per hour, spot bids).
MONEY = {"max_digits": 14, "decimal_places": 6}
