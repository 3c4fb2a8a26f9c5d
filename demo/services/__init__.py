"""demo/services/: what seed_demo plays, each a topic. history.py plays the 60-day past through
the real services on a moved clock, session.py is one order of its script, present.py adds the
last hours and the price cut, pools.py the demo's autoscaling pool, sample_cur.py the sample
bill that reconciliation reads."""
