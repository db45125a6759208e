from core.ports import free_ports


def test_free_ports_are_distinct_and_never_one_promised_to_another_process() -> None:
    # Promise every port of a first draw: a second draw of as many must find others.
    promised = free_ports(50)
    again = free_ports(50, avoid=promised)
    assert len(set(promised)) == len(set(again)) == 50 and not set(again) & set(promised)
