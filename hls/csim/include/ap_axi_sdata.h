// ap_axi_sdata.h: stands in for AMD Vitis HLS's `ap_axi_sdata.h` (not published on PyPI), for C
// simulation with g++; written for OptimusNIC, field names follow the documented Vitis HLS API.
// Subset: `ap_axiu<D, 0, 0, 0>`, D data bits with TKEEP, TSTRB and TLAST (no TUSER/TID/TDEST),
// built on whichever `ap_int.h` is on the include path (AMD's from hls4ml, or ours).
#ifndef OPTIMUSNIC_AP_AXI_SDATA_H
#define OPTIMUSNIC_AP_AXI_SDATA_H

#include "ap_int.h"

template <int D, int U, int TI, int TD>
struct ap_axiu {
  static_assert(U == 0 && TI == 0 && TD == 0, "this subset has no TUSER/TID/TDEST side channels");
  ap_uint<D> data;
  ap_uint<(D + 7) / 8> keep;
  ap_uint<(D + 7) / 8> strb;
  ap_uint<1> last;
};

#endif  // OPTIMUSNIC_AP_AXI_SDATA_H
