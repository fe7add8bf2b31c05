"""Debug searches: a loop over probes (make an artifact, check it, record it) driven by plain strategy functions.

`strategies` holds the search algorithms (bisect, linear, ddmin, greedy) over "evaluate this candidate";
one module per search (`build`, `tactics`, `precision`, `reduce`, `repeat`) builds artifacts and checks them.
"""
