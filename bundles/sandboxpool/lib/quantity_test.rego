package sandboxpool.lib.quantity_test

import data.sandboxpool.lib.quantity

test_values if {
	quantity.value("500m") == 0.5
	quantity.value("4") == 4
	quantity.value(4) == 4
	quantity.value("4Gi") == 4294967296
	quantity.value("1k") == 1000
	quantity.value("2M") == 2000000
	quantity.value("1E") == 1000000000000000000
	quantity.value("1e3") == 1000
	quantity.value("1.5") == 1.5
	quantity.value(".5") == 0.5
	quantity.value("-1") == -1
	quantity.value("250u") == 0.00025
	quantity.value("5n") == 0.000000005
}

test_not_quantities if {
	every q in ["4gi", "4g", "8 gigs", "", "m", "1e", "Gi", "0x10", 0.5, true, null, {}, []] {
		not quantity.value(q)
	}
}

test_positive if {
	quantity.positive("1m")
	not quantity.positive("0")
	not quantity.positive("-1Gi")
	not quantity.positive("garbage")
}

test_non_negative if {
	quantity.non_negative("0")
	quantity.non_negative("1Mi")
	not quantity.non_negative("-2Mi")
	not quantity.non_negative("garbage")
}
